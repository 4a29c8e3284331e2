"""Offset-overflow arithmetic: how long a signed 64-bit offset lasts at a given ingest rate.

Pure functions and constants; the Spark job applies the same formula as column expressions.
The store design Q&A (docs/claims.md, `offset-616-years`) divides Long.MAX_VALUE
by (message size × messages a day) and by 365 days, and prints 10 significant digits
(4096 B × 100亿 a day → 616.9314558 years).
"""

from typing import Final

LONG_MAX: Final = 2**63 - 1  # Java Long.MAX_VALUE: commit-log and consume-queue offsets are Java longs
DAYS_PER_YEAR: Final = 365  # the seed's table uses 365-day years (no leap days)
SECONDS_PER_DAY: Final = 86_400
SEED_PRINT_DIGITS: Final = 10  # the seed prints 98709.03293, 616.9314558, 61.69314558: 10 significant digits

# The seed's grid: message sizes in bytes × messages a day per server (the seed writes 10, 100, 1000 亿; 亿 = 10^8).
SEED_MESSAGE_SIZES: Final = (256, 512, 1024, 2048, 4096)
SEED_MESSAGES_PER_DAY: Final = (10**9, 10**10, 10**11)

# RocketMQ 4.9.8 CommitLog.calMsgLength: fixed part of a record with IPv4 hosts (empty body, topic and properties).
COMMITLOG_RECORD_FIXED_BYTES: Final = 91
# RocketMQ 4.9.8 ConsumeQueue.CQ_STORE_UNIT_SIZE: commit-log offset (8) + size (4) + tag hash code (8).
CONSUME_QUEUE_UNIT_BYTES: Final = 20
# Assumed properties of a keyed message sent by a RocketMQ 4.x producer without tags:
# "KEYS\x01<key>\x02UNIQ_KEY\x01<32 hex>\x02WAIT\x01true" (4.9.8 strips the trailing \x02).
# Run records do not carry properties, so the report assumes this layout and says so.
UNIQ_KEY_HEX_CHARS: Final = 32  # MessageClientIDSetter with an IPv4 address: 16 bytes as hex
PROPERTIES_FIXED_BYTES: Final = len("KEYS\x01\x02UNIQ_KEY\x01\x02WAIT\x01true") + UNIQ_KEY_HEX_CHARS


def years_until_overflow(bytes_per_message: float, messages_per_day: float) -> float:
    """Years until an offset that grows by ``bytes_per_message`` per message passes Long.MAX_VALUE."""
    if bytes_per_message <= 0 or messages_per_day <= 0:
        raise ValueError("bytes per message and messages per day must be positive")
    return LONG_MAX / (bytes_per_message * messages_per_day) / DAYS_PER_YEAR


def assumed_properties_bytes(key_chars: float) -> float:
    """Bytes of the assumed properties string for a message whose KEYS value has ``key_chars`` characters."""
    return PROPERTIES_FIXED_BYTES + key_chars


def commitlog_record_bytes(body_bytes: float, topic_bytes: float, properties_bytes: float) -> float:
    """Size of one commit-log record (RocketMQ 4.9.8 calMsgLength with IPv4 hosts)."""
    return COMMITLOG_RECORD_FIXED_BYTES + body_bytes + topic_bytes + properties_bytes


def format_seed(value: float) -> str:
    """Format a horizon the way the seed prints it (10 significant digits)."""
    return f"{value:.{SEED_PRINT_DIGITS}g}"
