"""The built-in tiers' declarations, one module each (found by the registry, iomatrix.tiers): what
the plan, the matrix and the reports read of a tier. Each names its implementation and report
companion by "module:Class"; nothing here imports them."""
