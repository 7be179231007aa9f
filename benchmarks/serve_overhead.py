"""What `cookbook serve` costs per SL step: the same steps through the real tinker SDK over HTTP vs in process.

    .venv/bin/python benchmarks/serve_overhead.py [--steps 5] [--port 8650] [--batches tiny,batch8]

Two batches: "tiny" (1 chat of ~24 tokens: almost all of a step is fixed per-request cost) and "batch8" (8 chats of
64-280 tokens from common.chat_examples: a realistic SL step). A step is forward_backward + optim_step submitted
back to back and both awaited (the recipes' sl_loop does this). In process: LocalServiceClient. Over HTTP: a
`cookbook serve --no-record` subprocess on 127.0.0.1 and `tinker.ServiceClient(base_url=...)` in this process. Each
side warms up with one step, then `--steps` steps alternate in process / over HTTP (so a change of load on the
machine hits both alike; the two processes take turns through the compute lease); the table shows medians and the
difference (the overhead: JSON/protobuf encoding, HTTP, the future polls). Written to
benchmarks/results/serve_overhead.json (common.write_result). On a loaded machine every figure grows with the load
(the JSON records the load averages).
Not here: sampling over HTTP, many concurrent clients.
"""

from __future__ import annotations

import argparse
import os
import time

import common  # noqa: F401 (puts the repository on sys.path)
from common import chat_examples, load_average, median, print_table, start_serve, write_result


def datums(batch: str, tokenizer):
    from tinker import types

    if batch == "tiny":
        examples = chat_examples(tokenizer, 1, min_tokens=24, max_tokens=24)
    else:
        examples = chat_examples(tokenizer, 8)
    return [
        types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights[1:]},
        )
        for tokens, weights in examples
    ]


def one_step(client, data) -> float:
    from tinker import types

    started = time.perf_counter()
    forward_backward = client.forward_backward(data, "cross_entropy")
    optim = client.optim_step(types.AdamParams(learning_rate=1e-5))
    forward_backward.result()
    optim.result()
    return time.perf_counter() - started


def interleaved(batches: dict, steps: int, port: int) -> dict[str, dict[str, list[float]]]:
    """Both clients made first; then, per batch, one warm-up step each and `steps` pairs of steps that alternate
    in process / over HTTP, so that a change of load on the machine hits both sides alike."""
    import tinker

    from cookbook_engine import models
    from cookbook_engine.backends.local import LocalServiceClient

    local = (
        LocalServiceClient()
        .create_lora_training_client(models.DEFAULT_MODEL, rank=32, seed=0, train_unembed=False)
        .result()
    )
    server = start_serve(port, "--no-record")
    try:
        service = tinker.ServiceClient(base_url=f"http://127.0.0.1:{port}", api_key="tml-local")
        remote = service.create_lora_training_client(
            base_model=models.DEFAULT_MODEL, rank=32, seed=0, train_unembed=False
        ).result()
        times: dict[str, dict[str, list[float]]] = {}
        for name, data in batches.items():
            one_step(local, data), one_step(remote, data)  # warm-up
            pairs = [(one_step(local, data), one_step(remote, data)) for _ in range(steps)]
            times[name] = {"in_process": [a for a, _ in pairs], "http": [b for _, b in pairs]}
        return times
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--port", type=int, default=8650)
    parser.add_argument("--batches", default="tiny,batch8", help="which of tiny, batch8 to time")
    options = parser.parse_args()
    from cookbook_engine import models

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    models.prepare_default_model()
    tokenizer = models.load_tokenizer(models.DEFAULT_MODEL)
    batches = {name: datums(name, tokenizer) for name in options.batches.split(",")}
    load_start = load_average()
    times = interleaved(batches, options.steps, options.port)
    rows, results = [], {}
    for name, data in batches.items():
        tokens = sum(d.model_input.length for d in data)
        local_s, http_s = median(times[name]["in_process"]), median(times[name]["http"])
        results[name] = {
            "tokens": tokens,
            "in_process_s": times[name]["in_process"],
            "http_s": times[name]["http"],
            "in_process_median_s": local_s,
            "http_median_s": http_s,
            "overhead_ms": 1000 * (http_s - local_s),
        }
        rows.append(
            [
                name,
                tokens,
                f"{local_s:.3f}",
                f"{http_s:.3f}",
                f"{1000 * (http_s - local_s):+.0f}",
                f"{100 * (http_s / local_s - 1):+.0f}%",
            ]
        )
    print_table(
        f"SL step (forward_backward + optim_step, median of {options.steps})",
        ["batch", "tokens", "in process s", "HTTP s", "overhead ms", "overhead"],
        rows,
    )
    write_result("serve_overhead", {"steps": options.steps, "load_average_start": load_start, "results": results})


if __name__ == "__main__":
    main()
