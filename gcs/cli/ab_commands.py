"""``python -m gcs ab``: shared luck for A/B on a paraphrase set, resumable like ``run``.

    python -m gcs ab --data general --b-system "Answer in one sentence." --out runs/brief

Every prompt of the first ``--limit`` groups is answered by arm A and arm B (``--a-*`` / ``--b-*`` options: model,
dtype, system message, template, temperature, top-p) with each seed, under ``--method`` (shared luck) and under IS
(the control). ``results.csv`` gets one row per (group, prompt index, seed, method) as each chunk of rows finishes,
``summary.md`` the report (``gcs.ab_report``), ``run.json`` everything the rows depend on. Re-running the same
command resumes; more seeds compute only the new rows; changing an arm, the method, the metrics, max new tokens,
the engine or the data is refused.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gcs.checks import DEFAULT_MAX_NEW_TOKENS
from gcs.cli.support import (
    claim_out_dir,
    csv_list,
    engine_name,
    engine_of,
    engine_options,
    parse_seeds,
    run_record,
    write_atomic,
)
from gcs.experiments.data import BUILTIN_SETS, load_groups
from gcs.experiments.results import ResultsLog

KEYS = ("group", "prompt_index", "seed", "method")
TYPES = {"prompt_index": int, "seed": int, "identical": bool, "parts_at": float, "n_tokens_a": int, "n_tokens_b": int,
         "finished_a": bool, "finished_b": bool, "aligned": float, "e5_between": float}


def add_parser(commands) -> None:
    """The ``ab`` subcommand and its options."""
    sub = commands.add_parser("ab", help="shared luck for A/B: the effect of a change (system prompt, template, "
                                         "temperature, dtype, model version) with far fewer seeds")
    sub.add_argument("--data", required=True, help=f"a .jsonl/.csv file or a built-in set: {', '.join(BUILTIN_SETS)}")
    sub.add_argument("--seeds", type=parse_seeds, default=16, help="a count (0..n-1) or a list")
    sub.add_argument("--method", choices=["gcs", "gcswr"], default="gcswr", help="the shared luck (IS is the control)")
    sub.add_argument("--metrics", type=csv_list, default=["length", "e5_between"],
                     help="length, contains:WORD, regex:PATTERN, e5_to:REFERENCE, e5_between, aligned")
    sub.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                     help=f"tokens per response (default {DEFAULT_MAX_NEW_TOKENS})")
    sub.add_argument("--limit", type=int, default=None, help="use only the first N groups")
    sub.add_argument("--batch-rows", type=int, default=None, help="rows per generate call (default: automatic)")
    engine_options(sub, dtype=False)
    sub.add_argument("--out", required=True, help="output folder (re-running resumes)")
    sub.add_argument("--quiet", action="store_true", help="no progress bar")
    for arm in "ab":
        name = arm.upper()
        sub.add_argument(f"--{arm}-model", default=None, help=f"arm {name}'s model (default: the embedded SmolLM2)")
        sub.add_argument(f"--{arm}-dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                         help=f"arm {name}'s weights (auto: bf16 on CUDA and on CPUs with hardware bf16, else fp32)")
        sub.add_argument(f"--{arm}-system", default=None, help=f"arm {name}'s system message")
        sub.add_argument(f"--{arm}-template", default="{prompt}", help=f"arm {name}'s user turn, with {{prompt}}")
        sub.add_argument(f"--{arm}-temperature", type=float, default=1.0, help=f"arm {name}'s temperature (default 1)")
        sub.add_argument(f"--{arm}-top-p", type=float, default=None,
                         help=f"arm {name}'s nucleus sampling mass, in (0, 1] (default: off)")


def _variants(args: argparse.Namespace):
    from gcs.abtest.variants import Variant

    return [Variant(getattr(args, f"{arm}_model"), getattr(args, f"{arm}_system"), getattr(args, f"{arm}_template"),
                    getattr(args, f"{arm}_temperature"), getattr(args, f"{arm}_top_p"),
                    None if getattr(args, f"{arm}_dtype") == "auto" else getattr(args, f"{arm}_dtype"), arm.upper())
            for arm in "ab"]


def command_ab(args: argparse.Namespace) -> Path:
    from gcs.abtest.answers import ab
    from gcs.abtest.report import ab_report
    from gcs.abtest.scores import check_scores
    from gcs.abtest.variants import arms
    from gcs.checks import check_seeds

    groups = load_groups(args.data)[: args.limit]
    places = [(group.id, index) for group in groups for index in range(len(group.prompts))]
    prompts = [prompt for group in groups for prompt in group.prompts]
    repeated = next((i for i, prompt in enumerate(prompts) if prompts.index(prompt) != i), None)
    if repeated is not None:
        raise ValueError(f"group {places[repeated][0]!r} prompt {places[repeated][1]} repeats an earlier prompt of the "
                         "data: a prompt answered twice with one seed is one observation counted twice")
    seeds = check_seeds(args.seeds)
    scores, pairs = check_scores(args.metrics)
    a, b = _variants(args)
    pair = arms(a, b, args.max_new_tokens)  # loads both models (once: load_model caches them) and checks them
    dtype = lambda arm: str(next(arm.model.model.parameters()).dtype).removeprefix("torch.")  # noqa: E731
    arm_record = {f"{arm.slot}_{field}": value for arm in pair for field, value in
                  (("model", arm.model.name), ("dtype", dtype(arm)), ("system", arm.variant.system),
                   ("template", arm.variant.template), ("temperature", arm.variant.temperature),
                   ("top_p", arm.variant.top_p))}
    out = Path(args.out)
    claim_out_dir(out, run_record("ab", pair[0].model, args, **arm_record, method=args.method, metrics=args.metrics,
                                    max_new_tokens=args.max_new_tokens))  # its "model" and "dtype" are arm A's
    score_columns = [*(["e5_between"] if "e5_between" in pairs else []),
                     *(f"{score.label}_{slot}" for score in scores for slot in "ab")]
    columns = ["group", "prompt_index", "prompt", "method", "seed", "answer_a", "answer_b", "identical", "parts_at",
               "n_tokens_a", "n_tokens_b", "finished_a", "finished_b", "aligned", *score_columns]
    log = ResultsLog(out / "results.csv", columns, KEYS,
                     types={**TYPES, **{c: float for c in score_columns}})
    flat = {place: i for i, place in enumerate(places)}

    def save(frame):
        group, index = zip(*(places[i] for i in frame["prompt_index"]), strict=True) if len(frame) else ((), ())
        log.append(frame.assign(group=list(group), prompt_index=list(index))[columns])

    done = {(flat[(group, index)], seed, method) for group, index, seed, method in log.done()
            if (group, index) in flat}
    ab(prompts, a, b, seeds=seeds, method=args.method, metrics=args.metrics, max_new_tokens=args.max_new_tokens,
       engine=engine_of(args), batch_rows=args.batch_rows, resume=done, on_results=save, progress=not args.quiet)
    requested = {(group, index, seed, method) for group, index in places for seed in seeds
                 for method in (args.method, "is")}
    results = log.load()  # may hold rows of an earlier, larger run in the same folder: report ours only
    results = results[[key in requested for key in results[list(KEYS)].itertuples(index=False, name=None)]]
    results = results.assign(prompt_index=[flat[place]
                                           for place in zip(results["group"], results["prompt_index"], strict=True)])
    report = ab_report(results.sort_values(["method", "seed", "prompt_index"]), names=("A", "B"))
    arms_text = "\n".join(f"- {arm.name}: {arm.variant.describe()} (model `{arm.model.name}`, {dtype(arm)})"
                          for arm in pair)
    summary = (f"# Shared luck for A/B\n\nData `{args.data}` ({len(groups)} groups, {len(prompts)} prompts), "
               f"{len(seeds)} seeds, {args.method} against the IS control, max_new_tokens={args.max_new_tokens}, "
               f"engine {engine_name(args)}.\n\n{arms_text}\n\n" + "\n".join(f"- {line}" for line in report.lines)
               +
               f"\n\n## Effects\n\n{report.effects.to_markdown(index=False, floatfmt='.4g')}\n\n"
               f"## How close the answers stay\n\n{report.pairs.to_markdown(index=False, floatfmt='.3f')}\n")
    write_atomic(out / "summary.md", summary)
    return out
