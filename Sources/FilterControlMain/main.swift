print("filter-control")
