"""The Spark replay job (DESIGN.md §1, third use): verification and metrics
over many traces, locally or on a cluster. pyspark is imported only inside
these modules' functions; this file stays empty, so importing one module
(`sim.spark.job`, `sim.spark.session`, `sim.spark.synth`, …) loads only what it uses.
"""
