"""Direct logit attribution (``tinylm.analysis.circuits.dla``) on the text, a decoder's or an encoder-decoder's
(its first pair, teacher-forced): ``dla.json``, a layer × head grid at one position and one summed over the
text, a table line for each."""

from __future__ import annotations

from tinylm.analysis.circuit_figures import dla_grid
from tinylm.analysis.circuits.dla import direct_logit_attribution
from tinylm.analysis.registry import ReportFigure, Result, Subject, register
from tinylm.errors import TinyLMError
from tinylm.plots.figures import visible

AT = (
    "Direct logit attribution at one position", "The model's logit for the true next character at that position "
    "(or its difference against dla_against), split into what each part of the residual stream wrote there: "
    "each head's output through its W_O, each MLP's output, and (bottom row) the token embedding, the position "
    "embedding and the biases. Every part is read through the final LayerNorm with the scale the run computed, "
    "and through the output head; the cells add up to the logit. Red parts push the right character up, blue "
    "ones push it down.")
SUMMED = (
    "Direct logit attribution summed over the text", "As above, each part's contribution summed over every "
    "position of the text: the heads and MLPs that, directly, predict this text's next characters. An induction "
    "head shows up red on a repeated text; a previous-token head mostly writes for later heads to read, so its "
    "direct share is small.")


def _line(name: str, parts: dict, logit: float) -> str:
    ranked = sorted(((k, v) for k, v in parts.items()), key=lambda kv: -abs(kv[1]))[:3]
    return f"dla {name}: logit {logit:+.3f} = " + ", ".join(f"{k} {v:+.3f}" for k, v in ranked) + ", ..."


@register("dla", models=("decoder", "encoder-decoder"), order=40)
def dla_analysis(subject: Subject) -> Result:
    cfg, model = subject.cfg, subject.model
    against = cfg.get("dla_against")
    if subject.pairs:  # an encoder-decoder: the first pair, teacher-forced
        src, tgt = subject.probe.inputs
        dla = direct_logit_attribution(model, tgt[0].tolist(), subject.tokenizer, against, source=src[0].tolist(),
                                       targets=subject.probe.targets[0].tolist())
    else:
        dla = direct_logit_attribution(model, subject.ids, subject.tokenizer, against)
    positions = dla["positions"]
    at = cfg.get("dla_position")
    at = len(positions) - 1 if at is None else at
    if not 0 <= at < len(positions):
        raise TinyLMError(f"dla_position={at} must be a position of the text that has a next character: from 0 to "
                          f"{len(positions) - 1}, or null for the last")
    chosen = positions[at]
    wanted = f"{visible(chosen['target'])!r}" + (f" − {visible(against)!r}" if against else "")
    token = visible(dla["tokens"][at]) or "?"
    title = [f"Direct logit attribution at position {at} ({token!r} read), next {wanted}: logit {chosen['logit']:+.2f}",
             subject.note]
    summed = {name: sum(p["parts"][name] for p in positions) for name in chosen["parts"]}
    total = sum(p["logit"] for p in positions)
    summed_title = [f"Direct logit attribution summed over {len(positions)} positions: logits {total:+.2f}",
                    subject.note]
    figures = [ReportFigure("dla_position", dla_grid(chosen["parts"], title), *AT),
               ReportFigure("dla_summed", dla_grid(summed, summed_title), *SUMMED)]
    lines = [_line(f"at position {at} (next {wanted})", chosen["parts"], chosen["logit"]),
             _line("summed over the text", summed, total)]
    return Result(dla, figures, lines)
