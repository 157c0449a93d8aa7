"""Model adapters that live in their own modules (engine-backed baselines and the like)."""
