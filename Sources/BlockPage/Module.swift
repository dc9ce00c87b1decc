// BlockPage: rendering and serving the block page (see DESIGN.md, "Block page"). Empty until that work lands.
