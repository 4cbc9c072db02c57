"""Controllers (seed 001): deterministic and ephemeral commands, the storage and
compute controllers, and the simulated cluster replicas they drive.

Import names from their defining modules: this file stays empty so that
importing one module loads only what it uses (issue 37).
"""
