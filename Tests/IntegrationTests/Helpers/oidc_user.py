#!/usr/bin/env python3
"""The person's part of a sign-in at the tests' OpenID provider
(scripts/lib/oidc-provider), as a browser would do it: open the
authorization URL, sign in on the provider's form, and follow redirects
until the provider sends the browser to the redirect URI. Prints that
redirect's query as JSON ({"code": ..., "state": ...}, or the provider's
"error"), and exits 0; exits 1 with a message when the way there fails.
Only Python's standard library, so any Python runs it.

  oidc_user.py AUTHORIZATION-URL --redirect-uri URI --ca CA.pem --user ada --password PASSWORD
"""
import argparse
import html.parser
import http.cookiejar
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class LoginForm(html.parser.HTMLParser):
    """The form's action and its fields (the CSRF token, next)."""

    def __init__(self):
        super().__init__()
        self.action = None
        self.fields = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = attrs.get("action", "")
        elif tag == "input" and attrs.get("name"):
            self.fields[attrs["name"]] = attrs.get("value") or ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--redirect-uri", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    args = parser.parse_args()

    context = ssl.create_default_context(cafile=args.ca)
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context),
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
        NoRedirects,
    )

    def request(url, data=None, referer=None):
        headers = {"User-Agent": "hallpass-test-browser"}
        if referer:
            headers["Referer"] = referer
            origin = urllib.parse.urlsplit(referer)
            headers["Origin"] = f"{origin.scheme}://{origin.netloc}"
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        try:
            with opener.open(urllib.request.Request(url, data=body, headers=headers), timeout=10) as response:
                return response.status, response.headers, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read().decode(errors="replace")

    url = args.url
    signed_in = False
    for _ in range(10):
        if url.startswith(args.redirect_uri):
            query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
            print(json.dumps(query))
            return 0
        status, headers, body = request(url)
        if status in (301, 302, 303, 307, 308):
            url = urllib.parse.urljoin(url, headers["Location"])
            continue
        if status == 200 and "<form" in body and not signed_in:
            form = LoginForm()
            form.feed(body)
            fields = dict(form.fields)
            fields.update(username=args.user, password=args.password)
            action = urllib.parse.urljoin(url, form.action or url)
            status, headers, body = request(action, fields, referer=url)
            if status not in (302, 303):
                print(f"oidc_user: signing in as {args.user} answered {status}", file=sys.stderr)
                return 1
            signed_in = True
            url = urllib.parse.urljoin(action, headers["Location"])
            continue
        print(f"oidc_user: {url.split('?')[0]} answered {status}: {body[:500]}", file=sys.stderr)
        return 1
    print("oidc_user: too many redirects", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
