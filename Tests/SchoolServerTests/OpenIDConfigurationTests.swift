import HallpassConfig
import SchoolServer
import Testing

/// `signIn.oidc` in server.yaml: every key read, the defaults, and each
/// mistake refused with its key and line.
@Suite struct OpenIDConfigurationTests {
    static let minimal = """
        signIn:
          oidc:
            issuer: https://id.school.example/realms/school
            clientID: hallpass
            clientSecretFile: /etc/hallpass/oidc-secret
            redirectURL: https://hallpass.school.example:8443/console/oidc/callback
            roles:
              - value: it-admins
                role: admin

        """

    @Test func noSignInKeysMeanNoProvider() throws {
        #expect(try ServerConfiguration(yaml: "").openID == nil)
        #expect(try ServerConfiguration(yaml: "signIn: {}\n").openID == nil)
    }

    @Test func theDefaults() throws {
        let openID = try #require(try ServerConfiguration(yaml: Self.minimal).openID)
        #expect(openID.issuer == "https://id.school.example/realms/school")
        #expect(openID.clientID == "hallpass")
        #expect(openID.clientSecretFile == "/etc/hallpass/oidc-secret")
        #expect(openID.redirectURL == "https://hallpass.school.example:8443/console/oidc/callback")
        #expect(openID.scopes == ["openid", "profile", "email"])
        #expect(openID.loginClaim == "preferred_username")
        #expect(openID.nameClaim == "name")
        #expect(openID.rolesClaim == "groups")
        #expect(openID.roles == [OpenIDConfiguration.RoleRule(value: "it-admins", role: .admin)])
        #expect(openID.unmatched == .refuse)
        #expect(openID.caFile == nil)
    }

    @Test func everyKeyIsRead() throws {
        let openID = try #require(
            try ServerConfiguration(
                yaml: """
                    signIn:
                      oidc:
                        issuer: https://login.microsoftonline.com/0b5c/v2.0
                        clientID: 3f2a-11
                        clientSecretFile: /etc/hallpass/entra-secret
                        redirectURL: http://127.0.0.1:8080/console/oidc/callback
                        scopes: [openid, profile, email, groups, openid]
                        loginClaim: email
                        nameClaim: given_name
                        rolesClaim: roles
                        roles:
                          - value: Hallpass.Admin
                            role: admin
                          - value: Hallpass.DSL
                            role: safeguarding
                          - value: teacher-lab2
                            role: teacher
                            rooms: [lab2]
                            groups: [year9, year10]
                          - value: Hallpass.Auditor
                            role: auditor
                            rooms: [lab1]
                        unmatched: people
                        caFile: /etc/hallpass/school-ca.pem
                    """
            ).openID)
        #expect(openID.issuer == "https://login.microsoftonline.com/0b5c/v2.0")
        #expect(openID.redirectURL == "http://127.0.0.1:8080/console/oidc/callback")
        #expect(openID.scopes == ["openid", "profile", "email", "groups"])
        #expect(openID.loginClaim == "email")
        #expect(openID.nameClaim == "given_name")
        #expect(openID.rolesClaim == "roles")
        #expect(openID.roles.map(\.role) == [.admin, .safeguarding, .teacher, .auditor])
        #expect(openID.roles[2].scope == Scope(rooms: ["lab2"], groups: ["year9", "year10"]))
        #expect(openID.roles[3].scope == Scope(rooms: ["lab1"]))
        #expect(openID.unmatched == .people)
        #expect(openID.caFile == "/etc/hallpass/school-ca.pem")
    }

    /// With `unmatched: people` the console's own list decides, so no rule is needed.
    @Test func noRulesWithThePeopleList() throws {
        let yaml = Self.minimal.replacingOccurrences(of: "    roles:\n      - value: it-admins\n        role: admin\n", with: "    unmatched: people\n")
        let openID = try #require(try ServerConfiguration(yaml: yaml).openID)
        #expect(openID.roles.isEmpty)
    }

    static func replacing(_ old: String, with new: String) -> String {
        let yaml = minimal.replacingOccurrences(of: old, with: new)
        precondition(yaml != minimal, "\(old) is not in the minimal file")
        return yaml
    }

    /// Each wrong file is refused with the key and the line.
    @Test(arguments: [
        (replacing("    issuer: https://id.school.example/realms/school\n", with: ""), "signIn.oidc", 3),
        (replacing("https://id.school.example/realms/school", with: "http://id.school.example"), "signIn.oidc.issuer", 3),
        (replacing("https://id.school.example/realms/school", with: "https://id.school.example/?x=1"), "signIn.oidc.issuer", 3),
        (replacing("clientID: hallpass", with: "clientID: two words"), "signIn.oidc.clientID", 4),
        (replacing("clientSecretFile: /etc/hallpass/oidc-secret", with: "clientSecretFile: oidc-secret"), "signIn.oidc.clientSecretFile", 5),
        (replacing("https://hallpass.school.example:8443/console", with: "http://hallpass.school.example/console"), "signIn.oidc.redirectURL", 6),
        (replacing("    roles:", with: "    scopes: [profile, email]\n    roles:"), "signIn.oidc.scopes", 7),
        (replacing("    roles:", with: "    scopes: [openid, \"two words\"]\n    roles:"), "signIn.oidc.scopes[1]", 7),
        (replacing("    roles:", with: "    loginClaim: \"\"\n    roles:"), "signIn.oidc.loginClaim", 7),
        (replacing("role: admin", with: "role: metrics"), "signIn.oidc.roles[0].role", 9),
        (replacing("role: admin", with: "role: headteacher"), "signIn.oidc.roles[0].role", 9),
        // A teacher's rule without rooms or groups would see the whole school.
        (replacing("role: admin", with: "role: teacher"), "signIn.oidc.roles[0]", 8),
        (replacing("role: admin", with: "role: teacher\n        rooms: [\"lab 2\"]"), "signIn.oidc.roles[0].rooms[0]", 10),
        (replacing("      - value: it-admins\n", with: "      - group: it-admins\n"), "signIn.oidc.roles[0].group", 8),
        (replacing("    roles:\n      - value: it-admins\n        role: admin\n", with: "    roles: []\n"), "signIn.oidc.roles", 7),
        (replacing("    roles:", with: "    unmatched: admin\n    roles:"), "signIn.oidc.unmatched", 7),
        (replacing("    roles:", with: "    caFile: school-ca.pem\n    roles:"), "signIn.oidc.caFile", 7),
        (replacing("  oidc:", with: "  oauth:"), "signIn.oauth", 2),
        (replacing("    roles:", with: "    clientSecret: hunter2\n    roles:"), "signIn.oidc.clientSecret", 7),
    ])
    func mistakesNameTheirKey(yaml: String, key: String, line: Int) {
        do {
            _ = try ServerConfiguration(yaml: yaml)
            Issue.record("accepted: \(yaml)")
        } catch {
            #expect(error.key == key, "\(error)")
            #expect(error.line == line, "\(error)")
            #expect(error.description.hasPrefix("server configuration key \(key) (line \(line)): "), "\(error)")
        }
    }

    @Test func aTeachersRuleWithoutScopeSaysWhy() {
        let yaml = Self.replacing("role: admin", with: "role: teacher")
        #expect {
            try ServerConfiguration(yaml: yaml)
        } throws: { error in
            "\(error)".contains("a teacher's rule needs rooms or groups")
        }
    }
}
