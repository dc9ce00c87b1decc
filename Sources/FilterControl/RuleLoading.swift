public import SharedStore
public import VerdictCore

/// Opens the rules an offline command works on: a store file, or the store
/// inside a bundle folder (checked before use).
public enum RuleLoading {
    public enum Failure: Error, CustomStringConvertible {
        case store(StoreError)
        case bundle(BundleError)

        public var description: String {
            switch self {
            case .store(let error): error.description
            case .bundle(let error): error.description
            }
        }

        public var code: String {
            switch self {
            case .store(let error): error.code
            case .bundle(let error): error.code
            }
        }
    }

    public static func openStore(path: String) throws(Failure) -> RuleStore {
        do {
            return try RuleStore(path: path, verification: .full)
        } catch {
            throw .store(error)
        }
    }

    /// Verifies the bundle (the signature too when keys are given; an expired
    /// bundle is still readable offline) and opens its store.
    public static func openBundle(directory: String, trustedKeys: [BundlePublicKey]) throws(Failure) -> (RuleStore, VerifiedBundle) {
        let verifier = BundleVerifier(
            signatures: trustedKeys.isEmpty ? .integrityOnly : .trusted(trustedKeys),
            checkExpiry: false
        )
        let bundle: VerifiedBundle
        do {
            bundle = try verifier.verify(directory: directory)
        } catch {
            throw .bundle(error)
        }
        guard bundle.manifest.files.contains(where: { $0.name == BundleManifest.storeFileName }) else {
            throw .bundle(.missingFile(name: BundleManifest.storeFileName))
        }
        return (try openStore(path: bundle.path(of: BundleManifest.storeFileName)), bundle)
    }
}
