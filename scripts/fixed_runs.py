"""A fixed set of runs through gcs's public API, as token ids: what "the same seed gives the same tokens" is checked on.

    python scripts/fixed_runs.py --write before.json            # at one commit (this machine, its default dtype)
    python scripts/fixed_runs.py --compare before.json          # at another: exit status 1 and the runs that differ

Tokens are per machine (bf16 kernels differ between CPUs), so a file is only compared on the machine that wrote it.
The runs cover every path a seed's tokens go through: the three methods in one batch and in rounds, truncation,
ensembling, hindsight, a counterfactual edit, the race (trace), A/B under shared luck and, with ``--vllm``, the plugin
inside vLLM. ``tests/test_generation.py`` runs the set in its own process and in a fresh one with other hash seeds,
and checks that the rounds run's seeds are the one-batch run's rows. To compare with an older commit, run this
script there with that commit's package first on the path (``PYTHONPATH=/tmp/old``; docs/testing.md).
"""

from __future__ import annotations

import argparse
import json
import sys

PROMPTS = ["What is the capital of France?", "Which city is France's capital?"]
TOKENS = 12


QUICK = ("compare", "compare-truncated", "rounds", "hindsight")  # the suite's subset (tests/test_generation.py)


def runs(vllm: bool = False, only: tuple[str, ...] | None = None) -> dict[str, list]:
    """Every run's token ids (or texts, for the calls that return text), by name; ``only``: these runs alone."""
    import gcs

    model = gcs.load_model()

    def ids(frame) -> list:
        return [[row.method, int(row.seed), int(row.prompt_index), list(map(int, row.token_ids))]
                for row in frame.itertuples()]

    out: dict[str, list] = {}
    wanted = lambda name: only is None or name in only  # noqa: E731
    out["compare"] = ids(gcs.compare(PROMPTS, seeds=[0, 1], max_new_tokens=TOKENS, model=model))
    if wanted("compare-truncated"):
        out["compare-truncated"] = ids(gcs.compare(PROMPTS, seeds=[2], temperature=0.7, top_p=0.9, top_k=20,
                                                   max_new_tokens=TOKENS, model=model))
    if wanted("compare-ensembled"):
        out["compare-ensembled"] = ids(gcs.compare(PROMPTS, methods=["gcs", "gcswr"], seeds=[3], ensemble=1,
                                                   max_new_tokens=TOKENS, model=model))
    if wanted("rounds"):
        *_, last = gcs.compare_rounds(PROMPTS, methods=["is", "gcswr"], seeds=4, rounds=(2, 2),
                                      max_new_tokens=TOKENS, model=model, metrics=("aligned",))
        out["rounds"] = ids(last.frame)
    observed = gcs.compare(PROMPTS[:1], methods=["gcswr"], seeds=[4], max_new_tokens=TOKENS, model=model)
    response = list(map(int, observed.token_ids.iloc[0]))
    if wanted("hindsight"):
        out["hindsight"] = gcs.hindsight(PROMPTS[0], response, PROMPTS[1:], seed=4, max_new_tokens=TOKENS,
                                         model=model)
    if wanted("counterfactual"):
        out["counterfactual"] = [gcs.counterfactual(PROMPTS[0], response, at=1, replacement=" The", seed=4,
                                                    max_new_tokens=TOKENS, model=model)]
    if wanted("trace"):
        race = gcs.trace(PROMPTS, seed=5, max_new_tokens=TOKENS, model=model)
        out["trace"] = [list(map(int, ids)) for ids in race.token_ids]
    if wanted("ab"):
        ab = gcs.ab(PROMPTS, gcs.Variant(model=model), gcs.Variant(model=model, template="{prompt} Be brief."),
                    seeds=[6, 7], metrics=("length",), max_new_tokens=TOKENS)
        out["ab"] = sorted(ab.astype(str).values.tolist())
    if vllm:
        out["vllm"] = ids(gcs.compare(PROMPTS, seeds=[0, 1], max_new_tokens=TOKENS, model=model, engine="vllm"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", metavar="FILE", help="write the runs' tokens to FILE (JSON)")
    parser.add_argument("--compare", metavar="FILE", help="compare the runs with FILE; exit status 1 if any differs")
    parser.add_argument("--vllm", action="store_true", help="add a run on vLLM (starts an engine: about a minute)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)} (the suite's subset)")
    args = parser.parse_args(argv)
    if bool(args.write) == bool(args.compare):
        parser.error("give one of --write FILE and --compare FILE")
    got = runs(args.vllm, QUICK if args.quick else None)
    if args.write:
        with open(args.write, "w") as file:
            json.dump(got, file)
        print(f"{len(got)} runs written to {args.write}")
        return 0
    with open(args.compare) as file:
        expected = json.load(file)
    compared = [name for name in expected if name in got]
    differing = [name for name in compared if json.loads(json.dumps(got[name])) != expected[name]]
    missing = sorted(set(expected) - set(got))
    for name in differing:
        print(f"differs: {name}")
    print(f"{len(compared) - len(differing)} of {len(compared)} runs give the same tokens"
          + (f" ({', '.join(missing)} not run)" if missing else ""))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
