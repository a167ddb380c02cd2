"""The console's pages, one module per page. Views parse, call one service, render a partial."""
