"""The tables `specdec-eval bench` prints: from the report dicts of the speed and verdict-timing benches, which hold
every number (medians, spreads, fractions); nothing is computed here but the layout."""

from __future__ import annotations

from typing import Any

from ..gates.lossless import GATE as LOSSLESS

SIDE_NAMES = {"ours": "ours, plain", "spec": "ours, spec-dec", "hf": "HF transformers", "vllm": "vLLM CPU, plain"}
RATIO_NAMES = {"ours_vs_hf": "ours / HF", "spec_vs_plain": "spec / plain", "ours_vs_vllm": "ours / vLLM"}
OUTSIDE = ("vllm",)  # a server: no decode phase seen from outside, its memory is not this process's


def _spread(s: dict[str, Any] | None, unit: str = "", digits: int = 1) -> str:
    if s is None:
        return "n/a"
    return f"{s['median']:.{digits}f}{unit} ({s['low']:.{digits}f}-{s['high']:.{digits}f})"


def _limits(result: dict[str, Any]) -> list[str]:
    hw, f = result["hardware"], result["formulas"]
    return [
        f"hardware  {hw['device']}, {hw['threads']} threads: fp32 GEMM {hw['gemm_gflops']:.1f} GFLOP/s "
        f"({hw['gemm_size']}x{hw['gemm_size']}), memory {hw['bandwidth_gbs']:.1f} GB/s (read {hw['read_gbs']:.1f}, "
        f"copy {hw['copy_gbs']:.1f}; {hw['bandwidth_mib']} MiB); best of {hw['repeats']} repeats, before and after",
        f"formulas  {f['prefill']}",
        f"          {f['decode']}",
    ]


def _fraction_line(label: str, rates: dict[str, float]) -> str:
    prefill = f"prefill {rates['prefill_gflops']:.1f} GFLOP/s = {rates['prefill_of_peak']:.0%} of the GEMM peak"
    decode = f"decode {rates['decode_gbs']:.2f} GB/s = {rates['decode_of_bandwidth']:.0%} of the memory bandwidth"
    return f"{label}{prefill}, {decode}"


def print_bench(result: dict[str, Any]) -> None:
    head = (
        f"bench     {result['model']}, {result['device']} {result['dtype']}, kv {result['kv_cache']}, "
        f"{result['prompts']} prompts (mean {result['prompt_tokens_mean']} tokens), {result['max_new_tokens']} "
        f"new tokens, {result['rounds']} rounds interleaved"
    )
    print(head + (f", spec {result['spec']}" if "spec" in result else ""))
    for line in _limits(result):
        print(line)
    for row in result["rows"]:
        _print_row(row)
    for line in result["unstable"]:
        print(line)
    print(f"\nduration  {result['elapsed_s'] / 60:.1f} min; {describe_estimate(result['estimate'])}")


def describe_estimate(estimate: dict[str, Any]) -> str:
    cal = "; ".join(
        f"{name} prefill {c['prefill_tok_s']:.0f} tok/s, step {c['step_ms']:.0f} ms"
        + (f" ({c['tokens_per_step']:.2f} tokens)" if name == "spec" else "")
        for name, c in estimate["calibration"].items()
    )
    return (
        f"expected {estimate['expected_s'] / 60:.1f} min after calibration ({estimate['measurements']} "
        f"measurements; calibrated on one prompt of {next(iter(estimate['calibration'].values()))['prompt_tokens']}"
        f" tokens at batch 1: {cal})"
    )


def _print_row(row: dict[str, Any]) -> None:
    sides = [s for s in SIDE_NAMES if f"{s}_tok_s" in row]
    spreads = row["spreads"]
    print(f"\nbatch {row['batch']}, {row['prompts']} prompts: median over rounds (min-max)")
    print(f"  {'tok/s':<22}{'end to end':<26}decode")
    for s in sides:
        decode = _spread(spreads[f"{s}_decode_tok_s"]) if s not in OUTSIDE else "n/a"
        print(f"  {SIDE_NAMES[s]:<22}{_spread(spreads[f'{s}_tok_s']):<26}{decode}")
    for ratio, label in RATIO_NAMES.items():
        if ratio in row:
            e2e, dec = spreads.get(ratio), spreads.get(f"{ratio}_decode")
            print(f"  {label:<22}{_spread(e2e, 'x', 2):<26}{_spread(dec, 'x', 2)}")
    same = [f"ours = HF {row['ours_identical_to_hf']}"] if "ours_identical_to_hf" in row else []
    same += [f"ours = vLLM {row['ours_identical_to_vllm']}"] if "ours_identical_to_vllm" in row else []
    same += [f"spec = plain {row['spec_identical_to_plain']}"] if "spec_identical_to_plain" in row else []
    same += ["every round alike" if row["rounds_identical"] else "ROUNDS DIFFER"]
    print(f"  {'identical outputs':<22}{', '.join(same)}")
    if "acceptance_length" in row:
        print(f"  {'acceptance length':<22}{row['acceptance_length']}")
    print(f"  {'peak memory (MiB)':<22}" + ", ".join(f"{s} {row[f'{s}_peak_mib']}" for s in sides if s not in OUTSIDE))
    for i, s in enumerate(s for s in ("ours", "hf") if f"{s}_prefill_gflops" in row):
        rates = {k: row[f"{s}_{k}"] for k in ("prefill_gflops", "prefill_of_peak", "decode_gbs", "decode_of_bandwidth")}
        label = "vs hardware limit" if i == 0 else ""
        print(_fraction_line(f"  {label:<22}{s}: ", rates))


def _reasons(failed: list[list[str]]) -> dict[str, str]:
    """Each distinct reason a side FAILed for -> the rounds it did ("every round", "round 2")."""
    rounds: dict[str, list[int]] = {}
    for i, reasons in enumerate(failed, 1):
        for why in reasons:
            rounds.setdefault(why, []).append(i)
    every = len(failed)
    return {
        why: "every round" if len(r) == every > 1 else "round" + "s" * (len(r) > 1) + " " + ", ".join(map(str, r))
        for why, r in rounds.items()
    }


def print_verdict(report: dict[str, Any]) -> None:
    print(
        f"verdict bench  {report['task']}, {report['subset']}, {report['model']}, kv {report['kv_cache']}, "
        f"{report['rounds']} rounds interleaved"
        + (f", max output {report['max_output_len']} tokens" if report["max_output_len"] else "")
    )
    for line in _limits(report):
        print(line)
    print(f"\n  {'wall time (s)':<18}{'median (min-max)':<26}{'verdicts':<20}{LOSSLESS.name} gate")
    for name, side in report["sides"].items():
        lossless = " ".join(side[LOSSLESS.name])
        print(f"  {name:<18}{_spread(side['wall_s']):<26}{' '.join(side['verdicts']):<20}{lossless}")
    for name, s in report["ratios"].items():
        print(f"  {name:<34}{_spread(s, 'x', 2)}")
    for name, side in report["sides"].items():
        for why, rounds in _reasons(side.get("failed") or []).items():
            print(f"  {name} FAIL ({rounds}): {why}")
    for line in _guard_lines(report):
        print(line)
    phases = {k: v["median"] for k, v in report["plain_phases"].items()}
    print(_fraction_line("  plain run vs hardware limit: ", phases))
    for line in report["unstable"]:
        print(line)


def _guard_lines(report: dict[str, Any]) -> list[str]:
    return [
        f"  guard {name}: {g['median']:.2f}x {'within' if g['within'] else 'OVER'} {g['limit']:.2f}x"
        for name, g in report.get("guards", {}).items()
    ]


def print_endpoint_verdict(report: dict[str, Any]) -> list[str]:
    """The lines of `bench --verdict --endpoint`."""
    lines = [
        f"verdict bench against servers  run {report['endpoint']}, baseline {report['baseline_endpoint']}; "
        f"{report['task']} and {report['sampled_task']}, {report['subset']}, {report['rounds']} rounds interleaved"
        + (f", max output {report['max_output_len']} tokens" if report["max_output_len"] else ""),
        f"\n  {'wall time (s)':<24}{'median (min-max)':<26}verdicts",
    ]
    for name, side in report["sides"].items():
        lines.append(f"  {name:<24}{_spread(side['wall_s']):<26}{' '.join(side['verdicts'])}")
    for name, s in report["ratios"].items():
        lines.append(f"  {name:<44}{_spread(s, 'x', 2)}")
    lines += _guard_lines(report)
    for name, side in report["sides"].items():
        lines += [f"  {name} FAIL ({rounds}): {why}" for why, rounds in _reasons(side.get("failed") or []).items()]
    return lines + report["unstable"]
