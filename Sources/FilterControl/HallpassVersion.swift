/// hallpass's version, as the package's debian/changelog gives it (a test
/// checks that the two agree): sent to the school's server at enrolment and
/// in every check-in.
public enum HallpassVersion {
    public static let current = "0.2.0"
}
