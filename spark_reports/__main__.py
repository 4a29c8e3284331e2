"""`python -m spark_reports …` (also runnable as a script under spark-submit)."""

from spark_reports.cli import cli

if __name__ == "__main__":
    cli(prog_name="python -m spark_reports")
