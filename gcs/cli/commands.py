"""Command line: ``python -m gcs {run,style,ab,compare} ...`` (also installed as ``gcs``).

    python -m gcs run --data general --methods is,gcs,gcswr --temperatures 0,0.5,1 \\
        --seeds 3 --metrics e5,jaccard --out runs/general
    python -m gcs style --data lists --seeds 20 --out runs/lists
    python -m gcs ab --data general --b-system "Answer in one sentence." --out runs/brief   (gcs/cli/ab_commands.py)
    python -m gcs compare "What is DNA?" "Explain what DNA is." --temperature 1

``run`` and ``style`` write into ``--out``: ``results.csv`` (rows appended as they
finish), ``summary.md`` (Table 1 / Table 2 layout), ``figure.html`` (plotly) and
``run.json`` (the settings). Re-running the same command resumes: finished rows are
skipped, and a run killed at any moment loses no finished row and duplicates none.
Adding seeds, temperatures, methods (or ensembling) to a finished run computes only the
new cells; changing a setting that the existing rows depend on (model, engine, dtype, metrics,
max new tokens, top-k/top-p, data) is refused. The figure embeds plotly.js, so it opens offline.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gcs.checks import DEFAULT_MAX_NEW_TOKENS, MAX_SEED
from gcs.cli.support import (
    claim_out_dir,
    csv_list,
    engine_of,
    engine_options,
    float_list,
    parse_ensemble,
    parse_seeds,
    run_record,
    write_atomic,
)
from gcs.experiments.data import BUILTIN_SETS, load_groups
from gcs.experiments.export import csv_safe
from gcs.experiments.results import ResultsLog


def _quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def _sweep_log(out: Path, metrics: list[str]) -> ResultsLog:
    from gcs.experiments.sweeps import CELL_KEYS, RESULT_COLUMNS

    return ResultsLog(out / "results.csv", RESULT_COLUMNS, CELL_KEYS, rows_per_unit=len(metrics),
                      types={"seed": int, "temperature": float, "ensemble": int, "consistency": float})


def command_run(args: argparse.Namespace) -> Path:
    from gcs.engines.models import load_model
    from gcs.experiments.figures import consistency_figure
    from gcs.experiments.sweeps import CELL_KEYS, check_sweep, consistency_by_temperature, summary_table, sweep

    groups = load_groups(args.data)[: args.limit]
    plan = check_sweep(groups, temperatures=args.temperatures, methods=args.methods, seeds=args.seeds,
                       metrics=args.metrics, max_new_tokens=args.max_new_tokens, top_k=args.top_k, top_p=args.top_p,
                       ensemble=args.ensemble)
    metrics = list(plan.metrics)
    engine = engine_of(args)
    model = load_model(args.model, dtype=args.dtype)
    out = Path(args.out)
    claim_out_dir(out, run_record("run", model, args, metrics=metrics, max_new_tokens=args.max_new_tokens,
                                    top_k=args.top_k, top_p=args.top_p, ensemble=list(plan.ensembles)))
    log = _sweep_log(out, metrics)
    sweep(plan.groups, temperatures=plan.temperatures, methods=plan.settings.methods, seeds=plan.settings.seeds,
          metrics=metrics, model=model, max_new_tokens=args.max_new_tokens, top_k=args.top_k, top_p=args.top_p,
          ensemble=plan.ensembles, batch_rows=args.batch_rows, resume=log.load(), on_results=log.append,
          progress=not args.quiet, engine=engine)
    requested = {cell.key for cell in plan.cells()}
    results = log.load()  # may hold other cells of an earlier, larger run in the same folder: summarise ours only
    results = results[[key in requested for key in results[list(CELL_KEYS)].itertuples(index=False, name=None)]]
    summary = [f"# Consistency sweep\n\nModel `{model.name}`, data `{args.data}` ({len(groups)} groups), "
               f"max_new_tokens={args.max_new_tokens}, top_k={args.top_k}, top_p={args.top_p}; "
               f"{len(results) // len(metrics)} cells.\n"]
    for metric in metrics:
        part = results[results["metric"] == metric]
        summary.append(f"\n## {metric}: Table 1 layout\n\n{summary_table(part, metric=metric).to_markdown()}\n")
        by_temperature = consistency_by_temperature(part).drop(columns="metric")
        summary.append(f"\n## {metric}: consistency vs temperature\n\n"
                       f"{by_temperature.to_markdown(index=False, floatfmt='.4f')}\n")
    write_atomic(out / "summary.md", "".join(summary))
    write_atomic(out / "figure.html", consistency_figure(results, metric=metrics[0]).to_html(include_plotlyjs=True))
    return out


def command_style(args: argparse.Namespace) -> Path:
    from gcs.checks import check_methods, check_seeds
    from gcs.engines.models import load_model
    from gcs.experiments.classifiers import STYLE_SETS, check_classifiers
    from gcs.experiments.figures import style_figure
    from gcs.experiments.style import STYLE_KEYS, label_responses, style_consistency, style_responses, style_table
    from gcs.settings import SamplingSettings

    questions = load_groups(args.data)[: args.limit]
    names = args.classifiers or list(STYLE_SETS.get(args.data, ()))
    if not names:
        raise ValueError("name the style dimensions with --classifiers (built-in sets coding/lists have defaults)")
    classifiers = check_classifiers(names)
    settings = SamplingSettings(check_methods(args.methods), check_seeds(args.seeds), args.temperature,
                                max_new_tokens=args.max_new_tokens)
    model = load_model(args.model, dtype=args.dtype)
    out = Path(args.out)
    claim_out_dir(out, run_record("style", model, args, temperature=args.temperature,
                                    max_new_tokens=args.max_new_tokens))
    log = ResultsLog(out / "results.csv", [*STYLE_KEYS, "prompt", "response"], STYLE_KEYS, types={"seed": int})
    style_responses(questions, methods=settings.methods, seeds=settings.seeds, temperature=settings.temperature,
                    max_new_tokens=settings.max_new_tokens, model=model, batch_rows=args.batch_rows,
                    resume=log.load(), on_results=log.append, progress=not args.quiet, engine=engine_of(args))
    requested = {(q.id, m, s) for q in questions for m in settings.methods for s in settings.seeds}
    responses = log.load()  # summarise the requested responses only, not others an earlier run left there
    responses = responses[[key in requested for key in responses[list(STYLE_KEYS)].itertuples(index=False, name=None)]]
    labelled = label_responses(responses, classifiers=classifiers)
    consistency = style_consistency(labelled, classifiers=classifiers)
    write_atomic(out / "labels.csv", csv_safe(labelled).to_csv(index=False))
    summary = (f"# Stylistic consistency (p_repeat)\n\nModel `{model.name}`, data `{args.data}` "
               f"({len(questions)} questions), temperature {args.temperature}, {responses['seed'].nunique()} seeds, "
               f"max_new_tokens={args.max_new_tokens}.\n\n{style_table(consistency).to_markdown()}\n")
    write_atomic(out / "summary.md", summary)
    write_atomic(out / "figure.html", style_figure(consistency).to_html(include_plotlyjs=True))
    return out


def command_compare(args: argparse.Namespace) -> None:
    """The first seed's answers, method by method; with ``--seeds``, the paired verdict over them (one seed's
    agreement is an anecdote, so it is shown as such)."""
    from gcs.engines.models import load_model
    from gcs.experiments.comparison import compare_report
    from gcs.generation.responses import compare
    from gcs.stats.paired import verdict

    if args.seeds is not None and args.seed is not None:
        raise ValueError("give --seed (one seed's answers) or --seeds (a verdict over seeds), not both")
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        raise ValueError(f"--seed must be a whole number from 0 to 2^63 - 1, got {args.seed}")
    seeds = args.seeds if args.seeds is not None else [0 if args.seed is None else args.seed]
    engine = engine_of(args)  # (before the model loads: a contradiction costs nothing)
    model = load_model(args.model, dtype=args.dtype)
    frame = compare(args.prompts, methods=args.methods, seeds=seeds, temperature=args.temperature,
                    top_p=args.top_p, max_new_tokens=args.max_new_tokens, model=model, engine=engine)
    seed = int(frame["seed"].iloc[0])
    several = len(args.prompts) > 1
    report = compare_report(frame, metrics=("e5", "aligned"), tokenizer=model.tokenizer) if several else None
    for method, part in frame[frame["seed"] == seed].groupby("method", sort=False):
        score = ""
        if report is not None:
            e5 = report.per_seed.set_index(["method", "seed"]).loc[(method, seed), "e5"]
            score = f"  (E5 consistency of seed {seed}'s answers: {float(e5):.3f})"
        print(f"== {method}{score}")
        for prompt, response in zip(part["prompt"], part["response"], strict=True):
            print(f"  > {prompt}\n    {response.strip()}\n")
    if report is None:
        return
    if frame["seed"].nunique() == 1:
        print("One seed's agreement is an anecdote, not evidence: --seeds 16 gives the paired verdict over 16 seeds.")
    elif "is" in set(frame["method"]) and frame["method"].nunique() > 1:
        print("\n".join(f"- {line}" for line in verdict(report.scores)))
    else:
        print("The verdict compares methods with IS: add is and another method to --methods.")


def _version() -> str:
    import gcs  # the package, imported by then: this module is one of its submodules

    return gcs.__version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gcs", description="Gumbel Consistency Sampling experiments.")
    parser.add_argument("--version", action="version", version=f"gcs {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser, seeds_default: str) -> None:
        sub.add_argument("--data", required=True,
                         help=f"a .jsonl/.csv file or a built-in set: {', '.join(BUILTIN_SETS)}")
        sub.add_argument("--seeds", type=parse_seeds, default=parse_seeds(seeds_default),
                         help="a count (0..n-1) or a list")
        sub.add_argument("--model", default=None, help="transformers id or local path (default: embedded SmolLM2)")
        sub.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                         help=f"tokens per response (default {DEFAULT_MAX_NEW_TOKENS})")
        sub.add_argument("--limit", type=int, default=None, help="use only the first N groups")
        sub.add_argument("--batch-rows", type=int, default=None, help="rows per generate call (default: automatic)")
        sub.add_argument("--out", required=True, help="output folder (re-running resumes)")
        sub.add_argument("--quiet", action="store_true", help="no progress bar")
        engine_options(sub)

    run = commands.add_parser("run", help="consistency vs temperature on paraphrase groups (Fig. 2, Table 1)")
    common(run, "3")
    run.add_argument("--methods", type=csv_list, default=["is", "gcs", "gcswr"],
                     help="comma-separated: is, gcs, gcswr, ctx (default is,gcs,gcswr)")
    run.add_argument("--temperatures", type=float_list, default=[0.0, 0.5, 1.0],
                     help="comma-separated temperatures, each a setting of the sweep (default 0,0.5,1)")
    run.add_argument("--metrics", type=csv_list, default=["e5"],
                     help="e5, minilm, jaccard, aligned; e5:MODEL_ID names one")
    run.add_argument("--top-k", type=int, default=None, help="keep the k likeliest tokens (default: all)")
    run.add_argument("--top-p", type=float, default=None, help="nucleus sampling's mass, in (0, 1] (default: off)")
    run.add_argument("--ensemble", type=parse_ensemble, default=[0],
                     help="rewordings the model writes per prompt for ensembling (0: off, the default), or a list "
                          "of them, each a setting (0,2: without and with)")

    style = commands.add_parser("style", help="stylistic consistency p_repeat (Table 2)")
    common(style, "20")
    style.add_argument("--methods", type=csv_list, default=["is", "gcswr"],
                       help="comma-separated: is, gcs, gcswr, ctx (default is,gcswr)")
    style.add_argument("--temperature", type=float, default=1.0, help="softmax temperature (default 1)")
    style.add_argument("--classifiers", type=csv_list, default=None,
                       help="rule classifiers (default for coding: code ones; for lists: list_style,is_terse)")

    # imported here: gcs.cli.ab_commands imports this module's helpers
    from gcs.cli.ab_commands import add_parser as add_ab_parser

    add_ab_parser(commands)
    commands.add_parser("vllm-serve", help="serve a model on vLLM with gcs's samplers (gcs vllm-serve -h)",
                        add_help=False)
    compare = commands.add_parser("compare", help="answer a few paraphrases with each method, side by side")
    compare.add_argument("prompts", nargs="+", help="the paraphrases, each one argument")
    compare.add_argument("--methods", type=csv_list, default=["is", "gcs", "gcswr"],
                         help="comma-separated: is, gcs, gcswr, ctx (default is,gcs,gcswr)")
    compare.add_argument("--seed", type=int, default=None, help="the one seed every answer shares (default 0)")
    compare.add_argument("--seeds", type=parse_seeds, default=None,
                         help="a count (0..n-1) or a list: the first seed's answers, then the paired verdict over them")
    compare.add_argument("--temperature", type=float, default=1.0, help="softmax temperature (default 1)")
    compare.add_argument("--top-p", type=float, default=None, help="nucleus sampling's mass, in (0, 1] (default: off)")
    compare.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                         help=f"tokens per response (default {DEFAULT_MAX_NEW_TOKENS})")
    compare.add_argument("--model", default=None, help="transformers id or local path (default: embedded SmolLM2)")
    engine_options(compare)
    return parser


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gcs vllm-serve",
        description="vLLM's OpenAI-compatible server with gcs's samplers (requests choose them with vllm_xargs); "
                    "arguments after -- go to vLLM unchanged, e.g. -- --tensor-parallel-size 4")
    parser.add_argument("model", nargs="?", default=None, help="hub id or local folder (default: the embedded model)")
    parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1 (this machine only) unless you say otherwise")
    parser.add_argument("--port", type=int, default=8000, help="the port to listen on (default 8000)")
    parser.add_argument("--batch-invariant", action="store_true",
                        help="VLLM_BATCH_INVARIANT=1: a request's tokens do not depend on its batch (GPUs vLLM "
                             "supports it on; refused on CPU)")
    return parser


def command_vllm_serve(argv: list[str]) -> int:
    ours, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = serve_parser().parse_args(ours)
    from gcs.cli.vllm_server import vllm_serve

    try:
        vllm_serve(args.model, args.host, args.port, extra, args.batch_invariant)  # returns only if it could not start
    except (ValueError, ImportError) as error:
        print(f"gcs vllm-serve: error: {error}", file=sys.stderr)
        return 2
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["vllm-serve"]:
        return command_vllm_serve(argv[1:])
    args = build_parser().parse_args(argv)
    if getattr(args, "limit", None) is not None and args.limit < 1:
        print("gcs: error: --limit must be at least 1", file=sys.stderr)
        return 2
    _quiet_transformers()
    try:
        if args.command == "compare":
            command_compare(args)
            return 0
        if args.command == "ab":
            from gcs.cli.ab_commands import command_ab

            out = command_ab(args)
        else:
            out = command_run(args) if args.command == "run" else command_style(args)
    except ValueError as error:
        print(f"gcs: error: {error}", file=sys.stderr)
        return 2
    except ConnectionError as error:  # a served endpoint that failed (gcs.EndpointError): it says which and why
        print(f"gcs: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk, a read-only or vanished --out: say so, no traceback
        print(f"gcs: error: {error.strerror or error} ({error.filename or 'writing results'})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gcs: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
    figure = "" if args.command == "ab" else f", {out / 'figure.html'}"
    print(f"wrote {out / 'results.csv'}, {out / 'summary.md'}{figure}")
    return 0
