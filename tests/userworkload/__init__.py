"""A user's own model and data, outside hetsync: named module:function in a scenario's workload."""
