print("filterctl")
