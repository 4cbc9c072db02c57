"""What runs: configurations, workloads, scenarios, load generation, and the
harness that builds a deployment.
"""
