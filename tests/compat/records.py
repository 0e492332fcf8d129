"""The records the compatibility checks feed to the real runtime: full canonical records of
every golden case (the goldens themselves keep only a compact projection)."""

from __future__ import annotations

from tests.goldens import Case, iter_messages
from transforms.decoders import Message, create_decoder
from transforms.envelope import EmitOptions, OutRecord
from transforms.errors import DecodeError
from transforms.pipeline import Pipeline

__all__ = ["golden_records"]


def golden_records(case: Case) -> list[OutRecord]:
    """Every record a golden case produces, in order (lines that fail to decode produce none)."""
    opts = {k: v for k, v in case.options.items() if not k.startswith("__")}
    prefix = case.options.get("__topic_prefix", "cdcnorm")
    decoder = create_decoder(case.format_id, opts)
    pipeline = Pipeline(decoder, EmitOptions(prefix=prefix, decimal_mode=decoder.options.decimal_handling_mode))
    out: list[OutRecord] = []
    for number, key, payload in iter_messages(case, decoder.binary):
        try:
            out.extend(pipeline.process(Message(value=payload, key=key, topic=case.name, offset=number - 1)))
        except DecodeError:
            continue
    return out
