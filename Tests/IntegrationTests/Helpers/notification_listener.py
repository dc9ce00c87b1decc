"""Owns org.freedesktop.Notifications on a session bus and writes each Notify
call it gets to a file as one JSON line; answers with notification id 42.

Run with Debian's python3 (python3-dbus, python3-gi):
    notification_listener.py --address unix:path=... --out calls.jsonl
It writes 'ready' to --out's sibling '.ready' once it owns the name.
"""
import argparse
import json

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib


class Notifications(dbus.service.Object):
    def __init__(self, bus, out):
        super().__init__(bus, "/org/freedesktop/Notifications")
        self.out = out

    @dbus.service.method("org.freedesktop.Notifications", in_signature="susssasa{sv}i", out_signature="u",
                         sender_keyword="sender", connection_keyword="connection")
    def Notify(self, app_name, replaces_id, app_icon, summary, body, actions, hints, expire_timeout, sender=None, connection=None):
        uid = connection.get_unix_user(sender) if connection is not None else None
        record = {
            "app_name": str(app_name), "replaces_id": int(replaces_id), "app_icon": str(app_icon),
            "summary": str(summary), "body": str(body), "actions": [str(a) for a in actions],
            "hints": {str(k): (int(v) if isinstance(v, (dbus.Byte, dbus.Int32, dbus.UInt32)) else str(v)) for k, v in hints.items()},
            "expire_timeout": int(expire_timeout), "sender_uid": uid,
        }
        with open(self.out, "a") as f:
            f.write(json.dumps(record) + "\n")
        return dbus.UInt32(42)

    @dbus.service.method("org.freedesktop.Notifications", in_signature="", out_signature="ssss")
    def GetServerInformation(self):
        return ("hallpass-test", "hallpass", "1", "1.2")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--out", required=True)
    arguments = parser.parse_args()
    DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(arguments.address)
    name = dbus.service.BusName("org.freedesktop.Notifications", bus)
    Notifications(bus, arguments.out)
    with open(arguments.out + ".ready", "w") as f:
        f.write("ready\n")
    loop = GLib.MainLoop()
    GLib.timeout_add_seconds(60, loop.quit)  # never outlives a test
    loop.run()
    del name


if __name__ == "__main__":
    main()
