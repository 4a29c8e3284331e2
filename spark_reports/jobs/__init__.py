"""One module per report; each has ``run(spark, runs_dir, out_dir) -> ReportOutput`` and a spark-submit entry."""
