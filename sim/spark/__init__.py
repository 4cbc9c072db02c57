"""The Spark replay job (DESIGN.md §1, third use): verification and metrics
over many traces, locally or on a cluster. pyspark is imported only inside
these modules' functions, so importing the package costs nothing."""

from sim.spark.job import ReplayResult, replay
from sim.spark.session import SparkUnavailable, spark_session
from sim.spark.synth import synth_trace

__all__ = ["ReplayResult", "SparkUnavailable", "replay", "spark_session", "synth_trace"]
