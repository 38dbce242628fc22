"""spark-submit jobs/index.py [--lake-root DIR] [--env local|databricks] [--set k=v ...]"""
from _entry import submit

submit("index")
