"""spark-submit jobs/ingest.py [--input PATH ...] [--lake-root DIR] [--env local|databricks] [--set k=v ...]"""
from _entry import submit

submit("ingest")
