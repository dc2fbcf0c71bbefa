"""The group APIs: classic, KIP-848, offsets, and listing, describing and deleting groups."""
