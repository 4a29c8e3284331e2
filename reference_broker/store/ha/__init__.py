"""Classic master/slave replication, the store's side (RocketMQ 4.9.8's store/ha without the sockets): the wire
formats (protocol.py) and the SYNC_MASTER durability condition (replica.py). The threads that move the bytes
over TCP sit a layer up, in reference_broker/ha."""
