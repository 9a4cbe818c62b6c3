"""Distributed training on Ray: collection and gradient workers, and the wire codec they share."""
