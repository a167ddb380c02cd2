from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "MCP gateway"

    def ready(self) -> None:
        from django.conf import settings

        from gateway import config

        # The actions file's [mcp] table: each side-effecting tool becomes an action of the
        # ledger, in every process (the console, the reconciler, the gateway) alike.
        config.load_upstreams(settings.RECKON_ACTIONS_FILE)
