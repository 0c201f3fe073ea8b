"""batchgate: admission policy and reconciliation for HPC and batch work on Kubernetes."""

__version__ = "0.1.0"
