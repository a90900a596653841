"""Building the dead-letter record for a message a processor could not use."""

from __future__ import annotations

import base64
import hashlib

from schemas.events import DeadLetter
from services.common.codec import Rejection


def dead_letter(
    *,
    processor: str,
    source_topic: str,
    partition: int | None,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
    rejection: Rejection,
) -> DeadLetter:
    value = value or b""
    # Deterministic id: the same bad message redelivered is the same dead letter.
    ident = f"{source_topic}:{partition}:{offset}:{processor}"
    if offset is None:
        ident += ":" + hashlib.sha256(value).hexdigest()[:16]
    return DeadLetter(
        event_id=f"dl:{ident}",
        source_topic=source_topic,
        partition=partition,
        offset=offset,
        key_b64=base64.b64encode(key).decode() if key is not None else None,
        value_b64=base64.b64encode(value).decode(),
        reason=rejection.reason,
        detail=rejection.detail[:2000],
        processor=processor,
    )
