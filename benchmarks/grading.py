"""How long grading one code rollout takes: the built-in code problems graded with their reference solutions
(reward 1.0) and with a wrong stub, through `code_problems.grade_response` (what the RL loop calls).

Beside it, in the same run, the floor a grader can reach with the sandbox: one sandbox process running the solution
and the asserts as one plain script (no per-test accounting, no isolation between solution and tests). The ratio
grader / floor tells what the trusted two-process design costs. Rollouts are graded one at a time and then
`--parallel` at once (the RL loop grades a group's rollouts on a thread pool).

Measured alone or beside other work (say which: `uptime` is recorded in the result's load averages).
Run: .venv/bin/python benchmarks/grading.py [--problems 8] [--parallel 4]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import time

import common  # noqa: F401  (puts the repository on sys.path)

from cookbook_engine.rl.code_problems import CODE_PROBLEMS, grade_response
from cookbook_engine.sandbox import run_python
from tests.test_graders import REFERENCE_SOLUTIONS


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def grade_all(responses, parallel: int) -> tuple[float, list[float]]:
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        rewards = list(pool.map(lambda item: grade_response(item[0], item[1]).reward, responses))
    return time.perf_counter() - started, rewards


def floor_all(responses, parallel: int) -> float:
    def one(item):
        problem, response = item
        run_python(response.split("```python\n")[1].rsplit("```", 1)[0] + "\n" + "\n".join(problem.tests))

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, responses))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=4)
    args = parser.parse_args()
    problems = CODE_PROBLEMS[:: max(1, len(CODE_PROBLEMS) // args.problems)][: args.problems]
    right = [(p, fenced(REFERENCE_SOLUTIONS[p.name])) for p in problems]
    wrong = [(p, fenced(f"def {p.function_name}(*args, **kwargs):\n    return None")) for p in problems]
    run_python("pass")  # probe the sandbox once, outside the timings
    rows, payload = [], {}
    for parallel in (1, args.parallel):
        seconds_right, rewards_right = grade_all(right, parallel)
        seconds_wrong, rewards_wrong = grade_all(wrong, parallel)
        seconds_floor = floor_all(right, parallel)
        per_rollout = (seconds_right + seconds_wrong) / (2 * len(problems))
        floor = seconds_floor / len(problems)
        assert all(r == 1.0 for r in rewards_right) and all(r < 1.0 for r in rewards_wrong)
        rows.append([parallel, f"{1000 * per_rollout:.0f}", f"{1000 * floor:.0f}", f"{per_rollout / floor:.2f}x"])
        payload[f"parallel_{parallel}"] = {
            "grader_ms_per_rollout": 1000 * per_rollout,
            "one_process_floor_ms": 1000 * floor,
            "ratio": per_rollout / floor,
        }
    common.print_table(
        f"Grading {len(problems)} code rollouts (reference and wrong solutions)",
        ["parallel", "grader ms/rollout", "one-process floor ms", "grader / floor"],
        rows,
    )
    common.write_result("grading", {"problems": len(problems), **payload})


if __name__ == "__main__":
    main()
