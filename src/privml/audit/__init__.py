"""Empirical privacy checks: measure what a mechanism or model leaks."""

from privml.audit.neighbour_test import NeighbourTestResult, neighbour_distribution_test

__all__ = ["NeighbourTestResult", "neighbour_distribution_test"]
