"""`{% provider_states as providers %}`: each provider's budget as its callers see it (reconciliation.providers)."""

from django import template

from reconciliation.providers import states

register = template.Library()


@register.simple_tag
def provider_states():
    return states()
