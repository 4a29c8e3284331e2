"""Broker-side configuration: broker.conf, topics, consumer offsets, subscription groups (sans-IO but file I/O)."""
