"""spark-submit jobs/run_all.py [--input PATH ...] [--lake-root DIR] [--env local|databricks] [--set k=v ...]"""
from _entry import submit

submit("ingest,dedup,filter,tokenize,embed,index")
