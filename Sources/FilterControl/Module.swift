// FilterControl: see DESIGN.md. (Placeholder replaced as the module grows.)
