"""The course labs, as notebooks (package data): Lab 1 (Spark ML) and Lab 2 (ConvNets)."""
