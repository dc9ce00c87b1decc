"""The claims the provider gives: the standard ones from the Django user, and
`groups` (the names of the user's Django groups) under a scope of that name."""
from django.utils.translation import gettext_lazy as _
from oidc_provider.lib.claims import ScopeClaims


def userinfo(claims, user):
    claims["name"] = user.get_full_name() or user.username
    claims["given_name"] = user.first_name
    claims["family_name"] = user.last_name
    claims["preferred_username"] = user.username
    claims["email"] = user.email
    claims["email_verified"] = bool(user.email)
    return claims


class GroupsClaims(ScopeClaims):
    info_groups = (_("Groups"), _("The groups you belong to."))

    def scope_groups(self):
        return {"groups": sorted(group.name for group in self.user.groups.all())}
