"""The compatibility scoreboard (issue 21, item 4): real Kafka clients' own test suites, pinned,
run against any bootstrap address. Test tooling, not part of the product. See compat/README.md."""
