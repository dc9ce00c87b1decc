"""Makes the school the tests sign in at: its people and groups, an RSA
signing key, and the console as a confidential client."""
from django.contrib.auth.models import Group
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from oidc_provider.models import Client
from oidc_provider.models import ResponseType
from oidc_provider.models import RSAKey

# login, full name, groups; every password is the one given with --password.
PEOPLE = [
    ("ada", "Ada Lovelace", ["teacher-lab2", "staff"]),
    ("dora", "Dora Marsden", ["dsl", "staff"]),
    ("ian", "Ian Murdock", ["admins", "staff"]),
    ("sam", "Sam Pupil", ["year9-pupils"]),
]


class Command(BaseCommand):
    help = "Makes the test school's people, groups, signing key and the console's client."

    def add_arguments(self, parser):
        parser.add_argument("--client-id", required=True)
        parser.add_argument("--client-secret", required=True)
        parser.add_argument("--redirect-uri", required=True, action="append")
        parser.add_argument("--password", required=True)

    def handle(self, *args, **options):
        for login, name, groups in PEOPLE:
            user, _ = User.objects.get_or_create(username=login)
            user.first_name, _, user.last_name = name.partition(" ")
            user.email = f"{login}@school.test"
            user.set_password(options["password"])
            user.save()
            user.groups.set([Group.objects.get_or_create(name=group)[0] for group in groups])
        if not RSAKey.objects.exists():
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pem = key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ).decode()
            RSAKey.objects.create(key=pem)
        client, _ = Client.objects.get_or_create(client_id=options["client_id"])
        client.name = "hallpass console"
        client.client_type = "confidential"
        client.client_secret = options["client_secret"]
        client.jwt_alg = "RS256"
        client.require_consent = False
        client.reuse_consent = True
        client.redirect_uris = options["redirect_uri"]
        client.save()
        code, _ = ResponseType.objects.get_or_create(value="code", defaults={"description": "code (Authorization Code Flow)"})
        client.response_types.set([code])
        self.stdout.write(f"school ready: {len(PEOPLE)} people, client {client.client_id}")
