"""`test/service.py` for kafka-python's source release, which ships test/integration without it.

The integration fixtures import ExternalService and SpawnedService from it. Pointed at a running
broker (KAFKA_URI) they only construct an ExternalService and keep it as the fixture's `child`;
SpawnedService (a broker process of their own, for the SSL and SASL variants) has no use here and
says so if a test reaches it. The scoreboard copies this file into the unpacked sdist.
"""


class ExternalService:
    """A broker the fixtures did not start: nothing to start, stop or dump."""

    def __init__(self, host, port):
        self.host = host
        self.port = port

    def dump_logs(self):
        pass


class SpawnedService:
    """The fixtures' own broker process: not available when the suite runs against KAFKA_URI."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("this test starts its own broker (SSL/SASL), which the compat scoreboard does not provide")
