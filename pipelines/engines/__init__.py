"""Engines other than Spark that run crawlake kernels (Spark is the default engine of every stage)."""
