"""cdcnorm transforms: vendor CDC formats to canonical Debezium-envelope JSON, plus SMT chains.

A pure library: no Kafka, Redis or Spark imports. See :mod:`transforms.envelope` for the
canonical event, :mod:`transforms.decoders` for the formats and :mod:`transforms.smt` for the
single-message transforms.
"""

# first: decides whether the compiled modules or their sources load (transforms.compiled)
from transforms.compiled import status as compiled_status
from transforms.decoders import Decoder, Message, create_decoder
from transforms.envelope import ChangeEvent, EmitOptions, Operation, OutRecord, emit
from transforms.errors import CdcnormError, ConfigError, DecodeError

__all__ = [
    "CdcnormError",
    "ChangeEvent",
    "ConfigError",
    "DecodeError",
    "Decoder",
    "EmitOptions",
    "Message",
    "Operation",
    "OutRecord",
    "compiled_status",
    "create_decoder",
    "emit",
]
