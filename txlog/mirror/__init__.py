"""`txlog mirror`: a store's topics to a Kafka cluster and back, exactly once (docs/mirror.md).

`to_cluster.mirror_to` re-produces the store's committed transactions on a cluster through
confluent-kafka; `from_cluster.mirror_from` takes a cluster's committed records into a store.
What both share (client settings, the summary, topic configs, names) is in `common.py`.
confluent-kafka is imported inside functions, so importing this package needs nothing extra.
"""
