"""The services tests and the CLI start themselves: embedded PostgreSQL, local S3.
"""
