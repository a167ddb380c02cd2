"""The break-glass accounts' TOTP secrets are stored encrypted (allauth.mfa's adapter hooks).

The key is derived from Django's SECRET_KEY (HKDF-SHA256, its own context string), so a database
copy or backup alone yields no usable second factor and no new secret has to be managed. Rotating
SECRET_KEY keeps the authenticators working while the old key is listed in SECRET_KEY_FALLBACKS
(decryption tries each key; `manage.py break_glass_totp` sets a new secret under the new key).
A secret stored in the clear before this existed is still read, and replaced at the next set-up.
"""

from __future__ import annotations

import base64

from allauth.mfa.adapter import DefaultMFAAdapter
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

PREFIX = "fernet:"


def _fernet(secret_key: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"reckon mfa secrets").derive(secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def _keys() -> MultiFernet:
    return MultiFernet([_fernet(key) for key in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]])


class EncryptedSecrets(DefaultMFAAdapter):
    def encrypt(self, text: str) -> str:
        return PREFIX + _keys().encrypt(text.encode()).decode()

    def decrypt(self, encrypted_text: str) -> str:
        if not encrypted_text.startswith(PREFIX):
            return encrypted_text  # stored in the clear before secrets were encrypted
        try:
            return _keys().decrypt(encrypted_text.removeprefix(PREFIX).encode()).decode()
        except InvalidToken:
            raise ImproperlyConfigured(
                "a TOTP secret was encrypted with a SECRET_KEY that is neither SECRET_KEY nor in SECRET_KEY_FALLBACKS: "
                "list the old key in SECRET_KEY_FALLBACKS, or set the account up again (manage.py break_glass_totp)"
            ) from None
