"""A faithful Python reference implementation of the RocketMQ 4.x broker design."""

__version__ = "0.1.0"
