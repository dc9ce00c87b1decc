"""Opens one page in a real Firefox (Debian's firefox-esr, headless) and
prints its HTML, for hallpass's integration tests: Firefox driven through its
own Marionette protocol (length-prefixed JSON on 127.0.0.1:2828), so no
geckodriver is needed.

    firefox_page.py FIREFOX PROFILE URL

Prints the page source and exits 0, or prints `ERROR <error> <message>` (a
certificate Firefox refuses is `insecure certificate`) and exits 1. The
profile folder is made if needed; Firefox reads the system's policies
(/etc/firefox/policies/policies.json) as it would for a person."""
import json
import os
import socket
import subprocess
import sys
import time


def main():
    binary, profile, url = sys.argv[1:4]
    os.makedirs(profile, exist_ok=True)
    with open(os.path.join(profile, "user.js"), "w") as prefs:
        prefs.write('user_pref("marionette.port", 2828);\n')
    with open(os.path.join(profile, "firefox.log"), "w") as log:
        firefox = subprocess.Popen([binary, "--headless", "--marionette", "--no-remote", "--profile", profile],
                                   stdout=subprocess.DEVNULL, stderr=log)
    try:
        connection = None
        for _ in range(600):
            try:
                connection = socket.create_connection(("127.0.0.1", 2828), timeout=60)
                break
            except OSError:
                time.sleep(0.1)
        if connection is None:
            print("ERROR marionette did not listen")
            return 1
        pending = b""

        def read():
            nonlocal pending
            while b":" not in pending:
                chunk = connection.recv(65536)
                if not chunk:
                    raise EOFError("Firefox closed Marionette")
                pending += chunk
            length, _, rest = pending.partition(b":")
            length = int(length)
            while len(rest) < length:
                chunk = connection.recv(65536)
                if not chunk:
                    raise EOFError("Firefox closed Marionette")
                rest += chunk
            pending = rest[length:]
            return json.loads(rest[:length])

        read()  # Firefox's hello
        numbers = iter(range(1, 1000))

        def command(name, parameters):
            message = json.dumps([0, next(numbers), name, parameters]).encode()
            connection.sendall(str(len(message)).encode() + b":" + message)
            reply = read()
            return reply[2], reply[3]

        command("WebDriver:NewSession", {"acceptInsecureCerts": False})
        # The policies' certificates are imported as Firefox starts, asynchronously: give them a moment.
        time.sleep(2)
        error, _ = command("WebDriver:Navigate", {"url": url})
        if error:
            print("ERROR", error.get("error"), error.get("message", "")[:300])
            return 1
        _, source = command("WebDriver:GetPageSource", {})
        print(source["value"])
        command("WebDriver:DeleteSession", {})
        return 0
    finally:
        firefox.terminate()
        try:
            firefox.wait(15)
        except subprocess.TimeoutExpired:
            firefox.kill()


if __name__ == "__main__":
    sys.exit(main())
