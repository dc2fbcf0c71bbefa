"""SaslHandshake and SaslAuthenticate: PLAIN and SCRAM-SHA-256/512."""
