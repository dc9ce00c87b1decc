print("filter-data")
