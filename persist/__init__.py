"""persist: durable, definite time-varying collections over Blob and Consensus (seed 002).

Import names from their defining modules (`persist.location`, `persist.client`,
…): this file stays empty so that code needing only a location never pays for
the shard API's pyarrow (issue 37).
"""
