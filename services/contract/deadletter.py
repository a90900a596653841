"""Building the dead-letter record for a message a processor could not use."""

from __future__ import annotations

import base64
import hashlib

from schemas.events import DeadLetter
from services.contract.codec import Rejection

# Base64 makes a letter 4/3 of what it carries: 2 MB kept stays under the 4 MiB message
# limit of passk's broker (and app.py's producer limit), with room for the rest. Anything
# under PASSK_MAX_EVENT_BYTES (1 MB by default) is kept whole; a larger message is kept in
# part, and it stays whole in its source topic at the partition and offset recorded.
MAX_KEPT_BYTES = 2_000_000


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
    detail = rejection.detail[:2000]
    if len(value) > MAX_KEPT_BYTES:
        detail = (
            f"value is {len(value)} bytes; the first {MAX_KEPT_BYTES} are kept here, the whole "
            f"message is at {source_topic}[{partition}]@{offset}. {detail}"
        )
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
        value_b64=base64.b64encode(value[:MAX_KEPT_BYTES]).decode(),
        reason=rejection.reason,
        detail=detail,
        processor=processor,
    )
