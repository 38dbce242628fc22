"""spark-submit jobs/embed.py [--lake-root DIR] [--env local|databricks] [--set k=v ...]"""
from _entry import submit

submit("embed")
