"""Renderers: chat messages to tokens (with per-token loss weights) and back, like tinker-cookbook's.

A renderer splits a conversation into per-message segments, each a header (role markers, never trained on) and a
body (the content and its end-of-turn marker, trained on when TrainOnWhat says so). It also builds generation
prompts, names its stop sequences and parses sampled tokens back into a message.

Renderers: `template` (the tokenizer's own chat template, the default whenever the tokenizer has one), and the
named formats `chatml` (SmolLM/Qwen2.5 style), `qwen3` (ChatML with <think> blocks parsed out), `llama3` and
`role_colon` (plain "User: ... Assistant: ...", for base models). This module does tokenization only: no model,
no training.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from tinker import types

from storage.input_error import InputError

ROLES = ("system", "user", "assistant", "tool")


class TrainOnWhat(StrEnum):
    LAST_ASSISTANT_MESSAGE = "last_assistant_message"
    ALL_ASSISTANT_MESSAGES = "all_assistant_messages"
    ALL_MESSAGES = "all_messages"


class RendererError(InputError, ValueError):
    """A conversation or renderer choice that cannot be rendered; the message says which and why."""


@dataclass
class Segment:
    role: str
    header: list[int]
    body: list[int]
    tail: list[int]  # after the body, never trained on (e.g. the newline after <|im_end|>)


class Renderer:
    name = "base"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    # --- what each renderer defines -------------------------------------------------------------------------
    def _prefix(self) -> list[int]:
        return []

    def _segments(self, messages: list[dict]) -> list[Segment]:
        raise NotImplementedError

    def _assistant_header(self, messages: list[dict]) -> list[int]:
        raise NotImplementedError

    def get_stop_sequences(self) -> list[int] | list[str]:
        raise NotImplementedError

    # --- shared ---------------------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def build_supervised_example(
        self, messages: list[dict], train_on_what: TrainOnWhat | str = TrainOnWhat.LAST_ASSISTANT_MESSAGE
    ) -> tuple[list[int], list[float]]:
        """All tokens of the conversation and a weight per token (1.0 where the loss applies)."""
        check_messages(messages)
        train_on_what = TrainOnWhat(train_on_what)
        segments = self._segments(messages)
        last_assistant = max((i for i, s in enumerate(segments) if s.role == "assistant"), default=-1)
        tokens = list(self._prefix())
        weights = [0.0] * len(tokens)
        for i, seg in enumerate(segments):
            if train_on_what == TrainOnWhat.ALL_MESSAGES:
                trained = True
            elif train_on_what == TrainOnWhat.ALL_ASSISTANT_MESSAGES:
                trained = seg.role == "assistant"
            else:
                trained = i == last_assistant
            tokens += seg.header + seg.body + seg.tail
            weights += [0.0] * len(seg.header) + [1.0 if trained else 0.0] * len(seg.body) + [0.0] * len(seg.tail)
        return tokens, weights

    def build_generation_prompt(self, messages: list[dict]) -> types.ModelInput:
        """Tokens of the conversation so far followed by the assistant's header: what a sampler continues."""
        if messages:
            check_messages(messages, need_assistant=False)
        tokens = list(self._prefix())
        for seg in self._segments(messages):
            tokens += seg.header + seg.body + seg.tail
        tokens += self._assistant_header(messages)
        return types.ModelInput.from_ints(tokens)

    def continuation(self, messages: list[dict], new_messages: list[dict]) -> list[int]:
        """The tokens that follow the conversation's last message (an assistant reply, as sampled) when
        `new_messages` come next and the assistant replies again: the reply's tail, the new messages, the assistant's
        header. A multi-turn episode's next observation is its last one + the reply + these (rl/multi_turn.py)."""
        segments = self._segments(messages + new_messages)
        tokens = list(segments[len(messages) - 1].tail)
        for seg in segments[len(messages) :]:
            tokens += seg.header + seg.body + seg.tail
        return tokens + self._assistant_header(messages + new_messages)

    def parse_response(self, tokens: list[int]) -> tuple[dict, bool]:
        """The assistant message in sampled tokens, and whether it ended with a proper stop sequence."""
        stops = self.get_stop_sequences()
        ended = False
        if stops and isinstance(stops[0], int):
            for i, tok in enumerate(tokens):
                if tok in stops:
                    tokens, ended = tokens[:i], True
                    break
            text = self.tokenizer.decode(tokens, skip_special_tokens=False)
        else:
            text = self.tokenizer.decode(tokens, skip_special_tokens=False)
            for stop in stops:
                if stop in text:
                    text, ended = text.split(stop, 1)[0], True
        return {"role": "assistant", "content": self._clean_response(text)}, ended

    def _clean_response(self, text: str) -> str:
        return text.strip()


class TemplateRenderer(Renderer):
    """The tokenizer's own chat template, split per message by rendering growing prefixes of the conversation."""

    name = "template"

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        if not getattr(tokenizer, "chat_template", None):
            raise RendererError("renderer template: this tokenizer has no chat template; pick a named renderer")

    def _render(self, messages: list[dict], generation_prompt: bool = False) -> str:
        if not messages and not generation_prompt:
            return ""
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def _segments(self, messages):
        eos = self.tokenizer.eos_token or ""
        segments, rendered = [], ""
        for i, message in enumerate(messages):
            grown = self._render(messages[: i + 1])
            if not grown.startswith(rendered):
                raise RendererError(
                    f"renderer template: the chat template rewrites earlier turns at message {i + 1}; "
                    "pick a named renderer (e.g. chatml or qwen3)"
                )
            piece = grown[len(rendered) :]
            content = message["content"]
            start = piece.rfind(content) if content else -1
            if start < 0:  # empty content, or a template that transforms it: the whole piece is the body
                header_text, body_text, tail_text = "", piece, ""
            else:
                end = start + len(content)
                if eos and piece[end:].startswith(eos):
                    end += len(eos)
                header_text, body_text, tail_text = piece[:start], piece[start:end], piece[end:]
            segments.append(
                Segment(message["role"], self._encode(header_text), self._encode(body_text), self._encode(tail_text))
            )
            rendered = grown
        return segments

    def _assistant_header(self, messages):
        before = self._render(messages)
        after = self._render(messages, generation_prompt=True)
        if not after.startswith(before):
            raise RendererError("renderer template: generation prompt does not extend the conversation")
        return self._encode(after[len(before) :])

    def get_stop_sequences(self):
        return [self.tokenizer.eos_token_id]


class ChatMLRenderer(Renderer):
    """<|im_start|>role\\ncontent<|im_end|>\\n, as SmolLM2 and Qwen2.5 use."""

    name = "chatml"
    start, end = "<|im_start|>", "<|im_end|>"

    def _segments(self, messages):
        return [
            Segment(
                m["role"],
                self._encode(f"{self.start}{m['role']}\n"),
                self._encode(self._body_text(m) + self.end),
                self._encode("\n"),
            )
            for m in messages
        ]

    def _body_text(self, message: dict) -> str:
        return message["content"]

    def _assistant_header(self, messages):
        return self._encode(f"{self.start}assistant\n")

    def get_stop_sequences(self):
        return [self.tokenizer.convert_tokens_to_ids(self.end)]


class Qwen3Renderer(ChatMLRenderer):
    """ChatML with Qwen3's thinking blocks: past thinking is dropped from history and parsed out of replies."""

    name = "qwen3"
    _think = re.compile(r"<think>.*?</think>\s*", re.DOTALL)

    def _body_text(self, message):
        if message["role"] == "assistant":
            return self._think.sub("", message["content"])
        return message["content"]

    def _clean_response(self, text):
        return self._think.sub("", text).strip()


class Llama3Renderer(Renderer):
    name = "llama3"

    def _prefix(self):
        return self._encode("<|begin_of_text|>")

    def _segments(self, messages):
        return [
            Segment(
                m["role"],
                self._encode(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n"),
                self._encode(m["content"] + "<|eot_id|>"),
                [],
            )
            for m in messages
        ]

    def _assistant_header(self, messages):
        return self._encode("<|start_header_id|>assistant<|end_header_id|>\n\n")

    def get_stop_sequences(self):
        return [self.tokenizer.convert_tokens_to_ids("<|eot_id|>")]


class RoleColonRenderer(Renderer):
    """Plain text turns ("User: ...\\n\\nAssistant: ..."), for base models with no chat format."""

    name = "role_colon"

    def _segments(self, messages):
        segments = []
        for m in messages:
            role = m["role"].capitalize()
            segments.append(Segment(m["role"], self._encode(f"{role}:"), self._encode(f" {m['content']}\n\n"), []))
        return segments

    def _assistant_header(self, messages):
        return self._encode("Assistant:")

    def get_stop_sequences(self):
        return ["\n\nUser:"]


RENDERERS = {
    "template": TemplateRenderer,
    "chatml": ChatMLRenderer,
    "qwen3": Qwen3Renderer,
    "llama3": Llama3Renderer,
    "role_colon": RoleColonRenderer,
}


def renderer_names() -> list[str]:
    return ["auto", *RENDERERS]


def auto_renderer_name(tokenizer) -> str:
    """The model picks its renderer: its own chat template when it has one, else plain role-colon text."""
    return "template" if getattr(tokenizer, "chat_template", None) else "role_colon"


def get_renderer(name: str, tokenizer) -> Renderer:
    name = (name or "auto").strip()
    if name == "auto":
        name = auto_renderer_name(tokenizer)
    if name not in RENDERERS:
        raise RendererError(f"renderer {name!r} is unknown; choose one of {', '.join(renderer_names())}")
    return RENDERERS[name](tokenizer)


def check_messages(messages: list[dict], need_assistant: bool = True) -> None:
    if not isinstance(messages, list) or not messages:
        raise RendererError("a conversation must be a non-empty list of messages")
    for i, message in enumerate(messages, start=1):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise RendererError(f"message {i}: needs 'role' and 'content'")
        if message["role"] not in ROLES:
            raise RendererError(f"message {i}: unknown role {message['role']!r} (expected one of {', '.join(ROLES)})")
        if not isinstance(message["content"], str):
            raise RendererError(f"message {i}: content must be text")
    if need_assistant and not any(m["role"] == "assistant" for m in messages):
        raise RendererError("the conversation has no assistant message to train on")
