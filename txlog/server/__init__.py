"""`txlog serve`: the Kafka wire protocol over a store, so Kafka's own clients and tools run against it.

A wing of its own (docs/DESIGN.md §1, §11): the socket server reads Kafka frames, the handlers
(`txlog.server.handlers`, one module per concept) turn each request into calls on the same
`Transport` and coordinators the embedded clients use, and answer in Kafka's format. The
messages are encoded by kio, generated from Kafka's message specs.
"""
