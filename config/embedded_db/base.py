"""Django's PostgreSQL backend for the embedded cluster (config/localdb.py): the first connection a
process opens starts the cluster if it is not running, so importing the settings starts nothing
(`pytest --collect-only` leaves no cluster behind) and whatever needs the database starts it."""

from django.db.backends.postgresql import base

from config import localdb


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict:
        # A fresh clone has no password until the cluster is made: fill it in (Django and the
        # claims listener read it from this dict).
        # A harness that points this connection at a cluster of its own (chaos/world.py) keeps its own.
        password = localdb.password_for(self.settings_dict["HOST"], self.settings_dict["PORT"])
        if password is not None:
            self.settings_dict["PASSWORD"] = password
        return super().get_connection_params()
