import Testing
import VerdictCore

@Suite struct IPAddressTests {
    @Test(arguments: [
        ("192.0.2.1", "192.0.2.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("2001:db8::1", "2001:db8::1"),
        ("2001:DB8:0:0:0:0:0:1", "2001:db8::1"),
        ("::", "::"),
        ("::1", "::1"),
        ("fe80::", "fe80::"),
        ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
        ("::ffff:192.0.2.1", "::ffff:192.0.2.1"),
    ])
    func parsesAndPrints(input: String, expected: String) throws {
        #expect(try #require(IPAddress(input)).description == expected)
    }

    @Test(arguments: ["", "1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.4a", ":::", "1::2::3", "12345::", "g::1", "1:2:3:4:5:6:7:8:9"])
    func refusesMalformed(input: String) {
        #expect(IPAddress(input) == nil)
    }

    @Test func networksContainTheirAddresses() throws {
        let network = try #require(IPNetwork("198.51.100.77/24"))
        #expect(network.description == "198.51.100.0/24")
        #expect(network.contains(try #require(IPAddress("198.51.100.255"))))
        #expect(!network.contains(try #require(IPAddress("198.51.101.0"))))
        #expect(network.contains(try #require(IPAddress("::ffff:198.51.100.9"))))
        let v6 = try #require(IPNetwork("2001:db8:abcd::/48"))
        #expect(v6.contains(try #require(IPAddress("2001:db8:abcd:1::5"))))
        #expect(!v6.contains(try #require(IPAddress("2001:db8:abce::"))))
        #expect(IPNetwork("10.0.0.0/33") == nil)
        #expect(IPNetwork("10.0.0.0/-1") == nil)
        #expect(IPNetwork("::/129") == nil)
    }

    @Test func networkBytesRoundTrip() throws {
        for text in ["192.0.2.1", "2001:db8::8:800:200c:417a"] {
            let address = try #require(IPAddress(text))
            #expect(IPAddress(networkBytes: address.networkBytes) == address)
        }
    }
}
