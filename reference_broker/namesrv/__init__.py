"""The name server: broker registry and topic routes (namesrv/, RocketMQ 4.9.8)."""
